import { fireEvent, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockApi, renderWithClient, who } from "../testing/mockApi";
import { PlaybooksPage } from "./PlaybooksPage";
import { workloadOf } from "./StartRun";

const TEXT = "apiVersion: noetl.io/v2\nkind: Playbook\nworkflow:\n  - step: start\n    next: shuot\n";
const entries = [
  { path: "tests/hello", version: 1, catalog_id: "tests/hello@1", created_at: null },
  { path: "tests/hello", version: 2, catalog_id: "tests/hello@2", created_at: null },
  { path: "tests/loop", version: 1, catalog_id: "tests/loop@1", created_at: null },
];
const problem = { message: "step 'start': next: unknown step 'shuot' (line 5)", line: 5, step: "start", scope: "step 'start'", field: "next" };

function routes(validate: { status?: number; body: unknown }) {
  return {
    "POST /api/catalog/list": { body: { entries } },
    "POST /api/catalog/resource": { body: { ...entries[1], content: TEXT } },
    "POST /api/catalog/validate": validate,
    "POST /api/execute": { body: { execution_id: "4242", status: "RUNNING" } },
  };
}

afterEach(() => {
  vi.unstubAllGlobals();
  window.history.pushState(null, "", "/");
});

describe("PlaybooksPage", () => {
  it("lists each playbook with its versions and marks a version's problems on their lines", async () => {
    const calls = mockApi(routes({ status: 422, body: { code: "playbook_invalid", message: "1 problem(s)", problems: [problem] } }));
    renderWithClient(<PlaybooksPage who={who("viewer")} />);
    const rows = await screen.findAllByTestId("catalog-entry");
    expect(rows.map((r) => r.dataset.path)).toEqual(["tests/hello", "tests/loop"]);
    expect(rows[0].textContent).toContain("v1v2");
    fireEvent.click(screen.getByRole("button", { name: "v2" }));
    const marked = await screen.findByTestId("problem");
    expect(marked.dataset.line).toBe("5");
    expect(marked.textContent).toContain("unknown step 'shuot'");
    expect(document.querySelector("[data-line='5']")?.getAttribute("data-mark")).toBe("problem");
    expect(document.querySelector("[data-line='4']")?.getAttribute("data-mark")).toBeNull();
    expect(screen.getByTestId("validity").textContent).toBe("1 problem(s)");
    expect(calls.find((c) => c.url === "/api/catalog/resource")?.body).toEqual({ path: "tests/hello", version: 2 });
    expect(calls.find((c) => c.url === "/api/catalog/validate")?.body).toEqual({ content: TEXT });
    expect(screen.queryByRole("button", { name: /Start run/ })).toBeNull(); // a viewer does not execute
  });

  it("says a valid version is valid", async () => {
    mockApi(routes({ body: { valid: true, steps: 1, warnings: [] } }));
    renderWithClient(<PlaybooksPage who={who("viewer")} />);
    fireEvent.click((await screen.findAllByRole("button", { name: "v1" }))[0]); // tests/hello v1
    expect((await screen.findByTestId("validity")).textContent).toBe("valid");
    expect(screen.queryByTestId("problem")).toBeNull();
  });

  it("checks the workload before sending it and opens the new run", async () => {
    const calls = mockApi(routes({ body: { valid: true, steps: 1, warnings: [] } }));
    renderWithClient(<PlaybooksPage who={who("operator", { execute: true })} />);
    fireEvent.click(await screen.findByRole("button", { name: "v2" }));
    const box = await screen.findByRole("textbox", { name: "Workload (JSON)" });
    fireEvent.change(box, { target: { value: "{amount: 1}" } });
    fireEvent.click(screen.getByRole("button", { name: "Start run of v2" }));
    expect((await screen.findByTestId("workload-error")).textContent).toContain("not JSON");
    expect(calls.some((c) => c.url === "/api/execute")).toBe(false);
    fireEvent.change(box, { target: { value: '{"amount": 1200}' } });
    fireEvent.click(screen.getByRole("button", { name: "Start run of v2" }));
    await waitFor(() => expect(window.location.pathname).toBe("/ui/runs/4242"));
    expect(calls.find((c) => c.url === "/api/execute")?.body).toEqual({ path: "tests/hello", version: 2, workload: { amount: 1200 } });
  });
});

describe("workloadOf", () => {
  it("takes a JSON object and refuses anything else", () => {
    expect(workloadOf('{"a": [1]}')).toEqual({ workload: { a: [1] } });
    expect(workloadOf("  ")).toEqual({ workload: {} });
    expect(workloadOf("[1]").error).toMatch(/JSON object/);
    expect(workloadOf("null").error).toMatch(/JSON object/);
    expect(workloadOf("{").error).toMatch(/not JSON/);
  });
});
