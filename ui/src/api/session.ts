// The token lives in sessionStorage: gone when the tab closes, never in a cookie or a URL.
/** Also read by index.html before the app loads (vite.config.ts, `earlyElkWorker`). */
export const TOKEN_KEY = "milepost.token";

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token.trim());
}

export function clearToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}
