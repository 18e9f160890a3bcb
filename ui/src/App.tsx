import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { api } from "./api/client";
import { clearToken, getToken } from "./api/session";
import { refused } from "./auth/refused";
import type { Whoami } from "./api/types";
import { ApprovalsPage } from "./approvals/ApprovalsPage";
import { SignIn } from "./auth/SignIn";
import { NavLinks } from "./nav/NavLinks";
import { PlaybooksPage } from "./playbooks/PlaybooksPage";
import { preload } from "./run/layout";
import { prefetchRun } from "./run/queries";
import { RunPage } from "./run/RunPage";
import { RunsPage } from "./runs/RunsPage";
import { href, navigate, useRoute, type Route } from "./router";
import { WorkersPage } from "./workers/WorkersPage";

export function App() {
  const route = useRoute();
  const client = useQueryClient();
  const [who, setWho] = useState<Whoami | null>(null);
  const [checking, setChecking] = useState(() => getToken() !== null);

  useEffect(() => {
    if (!getToken()) return;
    api<Whoami>("/api/whoami")
      .then(setWho)
      .catch((e) => refused(e) && clearToken())
      .finally(() => setChecking(false));
    preload(); // elkjs' worker loads while whoami is asked: a run page opened directly needs it
    if (route.page === "run") prefetchRun(client, route.id); // the page opened at start-up
  }, []);

  useEffect(() => {
    // once signed in: elkjs loads on its worker's thread while the runs list is read
    if (who) preload();
  }, [who]);

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
        <NavLinks current={route} />
        <nav>
          <span className="who" data-testid="whoami">
            {who.user ?? who.name ?? "token"} · {who.role}
          </span>
          <button onClick={signOut}>Sign out</button>
        </nav>
      </header>
      <main>{page(route, who)}</main>
    </div>
  );
}

function page(route: Route, who: Whoami) {
  switch (route.page) {
    case "run":
      return <RunPage id={route.id} who={who} />;
    case "approvals":
      return <ApprovalsPage who={who} />;
    case "playbooks":
      return <PlaybooksPage who={who} />;
    case "workers":
      return <WorkersPage />;
    default:
      return <RunsPage who={who} />;
  }
}
