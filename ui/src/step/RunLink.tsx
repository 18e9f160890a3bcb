import { href, navigate } from "../router";

/** A link to another run's page (a child, a parent), followed without a reload. */
export function RunLink({ id, testid }: { id: string; testid?: string }) {
  const to = { page: "run" as const, id };
  return (
    <a
      href={href(to)}
      data-testid={testid}
      onClick={(e) => {
        e.preventDefault();
        navigate(to);
      }}
    >
      {id}
    </a>
  );
}
