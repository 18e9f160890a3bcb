// The token lives in sessionStorage: gone when the tab closes, never in a cookie or a URL.
const KEY = "milepost.token"; // index.html reads it too (vite.config.ts, earlyElkWorker)

export function getToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token.trim());
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}
