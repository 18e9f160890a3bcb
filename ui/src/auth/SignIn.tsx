import { FormEvent, useState } from "react";
import { api, ApiError } from "../api/client";
import { setToken } from "../api/session";
import type { Whoami } from "../api/types";

/** Asks for a token, checks it with GET /api/whoami, keeps it in sessionStorage. */
export function SignIn({ onSignedIn }: { onSignedIn: (who: Whoami) => void }) {
  const [token, setValue] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const who = await api<Whoami>("/api/whoami", {}, token.trim());
      setToken(token);
      onSignedIn(who);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="signin" onSubmit={submit}>
      <h1>milepost</h1>
      <label>
        API token
        <input
          name="token"
          type="password"
          autoComplete="off"
          value={token}
          onChange={(e) => setValue(e.target.value)}
          placeholder="mp_…"
        />
      </label>
      <button type="submit" disabled={busy || !token.trim()}>
        Sign in
      </button>
      {error && <p className="error" role="alert">{error}</p>}
    </form>
  );
}
