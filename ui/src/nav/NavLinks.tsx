import { href, navigate, type Route } from "../router";

const LINKS: { route: Route; label: string }[] = [
  { route: { page: "runs" }, label: "Runs" },
  { route: { page: "approvals" }, label: "Approvals" },
  { route: { page: "playbooks" }, label: "Playbooks" },
  { route: { page: "workers" }, label: "Workers" },
];

/** The nav bar's pages; the current one marked (a run's page belongs to Runs). */
export function NavLinks({ current }: { current: Route }) {
  const here = current.page === "run" ? "runs" : current.page;
  return (
    <span className="nav-links">
      {LINKS.map(({ route, label }) => (
        <a
          key={label}
          href={href(route)}
          aria-current={route.page === here ? "page" : undefined}
          onClick={(e) => {
            e.preventDefault();
            navigate(route);
          }}
        >
          {label}
        </a>
      ))}
    </span>
  );
}
