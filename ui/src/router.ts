import { useEffect, useState } from "react";

// A small history router: the app lives under /ui/ (vite `base`), the server answers
// index.html for every client route, so a reload of /ui/runs/12 lands here.
export const BASE = "/ui";

export type Route = { page: "runs" } | { page: "run"; id: string } | { page: Section };

/** The pages of the nav bar besides the runs list, each at `/ui/<name>`. */
export const SECTIONS = ["approvals", "playbooks", "workers"] as const;
export type Section = (typeof SECTIONS)[number];

export function parse(pathname: string): Route {
  const rest = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname;
  const m = rest.match(/^\/runs\/([0-9]+)\/?$/);
  if (m) return { page: "run", id: m[1] };
  const section = SECTIONS.find((s) => rest.replace(/\/$/, "") === `/${s}`);
  return section ? { page: section } : { page: "runs" };
}

export function href(route: Route): string {
  if (route.page === "run") return `${BASE}/runs/${route.id}`;
  return route.page === "runs" ? `${BASE}/runs` : `${BASE}/${route.page}`;
}

export function navigate(route: Route): void {
  window.history.pushState(null, "", href(route));
  window.dispatchEvent(new PopStateEvent("popstate"));
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(window.location.pathname));
  useEffect(() => {
    const on = () => setRoute(parse(window.location.pathname));
    window.addEventListener("popstate", on);
    return () => window.removeEventListener("popstate", on);
  }, []);
  return route;
}
