import { useEffect, useState } from "react";
import { api } from "./api/client";
import { clearToken, getToken } from "./api/session";
import type { Whoami } from "./api/types";
import { SignIn } from "./auth/SignIn";
import { RunPage } from "./run/RunPage";
import { RunsPage } from "./runs/RunsPage";
import { href, navigate, useRoute } from "./router";

export function App() {
  const route = useRoute();
  const [who, setWho] = useState<Whoami | null>(null);
  const [checking, setChecking] = useState(() => getToken() !== null);

  useEffect(() => {
    if (!getToken()) return;
    api<Whoami>("/api/whoami")
      .then(setWho)
      .catch(() => clearToken())
      .finally(() => setChecking(false));
  }, []);

  if (checking) return null;
  if (!who) return <SignIn onSignedIn={setWho} />;
  const signOut = () => {
    clearToken();
    setWho(null);
  };
  return (
    <div className="app">
      <header>
        <a
          href={href({ page: "runs" })}
          onClick={(e) => {
            e.preventDefault();
            navigate({ page: "runs" });
          }}
        >
          milepost
        </a>
        <nav>
          <span className="who" data-testid="whoami">
            {who.user ?? who.name ?? "token"} · {who.role}
          </span>
          <button onClick={signOut}>Sign out</button>
        </nav>
      </header>
      <main>{route.page === "run" ? <RunPage id={route.id} who={who} /> : <RunsPage who={who} />}</main>
    </div>
  );
}
