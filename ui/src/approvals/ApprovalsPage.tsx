import { useInfiniteQuery, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { api, query } from "../api/client";
import type { Whoami } from "../api/types";
import { when } from "../format";
import { ApprovalCard, RiskBadge, RunLink } from "./ApprovalCard";
import { followApprovals } from "./live";
import type { ApprovalList } from "./types";

// The pending list is read again when the runs stream says an approval may have changed
// (`followApprovals`), not polled.

/** Approvals: what waits for a decision, and the history of decided ones. */
export function ApprovalsPage({ who }: { who: Whoami }) {
  const [tab, setTab] = useState<"pending" | "history">("pending");
  return (
    <section className="approvals">
      <h2>Approvals</h2>
      <div className="tabs" role="tablist">
        <button role="tab" aria-selected={tab === "pending"} onClick={() => setTab("pending")}>Pending</button>
        <button role="tab" aria-selected={tab === "history"} onClick={() => setTab("history")}>History</button>
      </div>
      {tab === "pending" ? <Pending who={who} /> : <History />}
    </section>
  );
}

function Pending({ who }: { who: Whoami }) {
  const client = useQueryClient();
  // pages of the API's keyset (100 each, in the order approvals were asked): "More" reads
  // the next, and a change re-reads every page shown
  const list = useInfiniteQuery({
    queryKey: ["approvals", "pending"],
    queryFn: ({ pageParam }) => api<ApprovalList>(`/api/approvals${query({ status: "pending", after: pageParam })}`),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.next ?? undefined,
  });
  useEffect(() => followApprovals(() => void client.invalidateQueries({ queryKey: ["approvals", "pending"] })), [client]);
  if (list.error) return <p className="error">{(list.error as Error).message}</p>;
  const items = list.data?.pages.flatMap((p) => p.items) ?? [];
  return (
    <div>
      {!who.may.approve && <p className="muted">Your role ({who.role}) may not decide approvals.</p>}
      {items.map((item) => (
        <ApprovalCard key={item.approval_id} item={item} who={who} />
      ))}
      {list.data && items.length === 0 && <p className="empty">Nothing waits for a decision.</p>}
      {list.hasNextPage && (
        <div className="pager">
          <button disabled={list.isFetchingNextPage} onClick={() => void list.fetchNextPage()}>More</button>
        </div>
      )}
    </div>
  );
}

function History() {
  const [after, setAfter] = useState<string[]>([]);
  const list = useQuery({
    queryKey: ["approvals", "history", after],
    queryFn: () => api<ApprovalList>(`/api/approvals${query({ decided: "true", after: after[after.length - 1] })}`),
  });
  if (list.error) return <p className="error">{(list.error as Error).message}</p>;
  const items = list.data?.items ?? [];
  return (
    <div>
      <table className="list">
        <thead>
          <tr><th>Id</th><th>Playbook</th><th>Step</th><th>Run</th><th>Risk</th><th>Outcome</th><th>Approvals</th><th>Decided</th></tr>
        </thead>
        <tbody>
          {items.map((a) => (
            <tr key={a.approval_id} data-testid="history-row" data-status={a.status}>
              <td>{a.approval_id}</td>
              <td>{a.path}</td>
              <td>{a.step}</td>
              <td><RunLink id={a.execution_id} /></td>
              <td><RiskBadge risk={a.risk} /></td>
              <td>{a.status}</td>
              <td>{a.approved} / {a.quorum}</td>
              <td>{when(a.decided_at)}</td>
            </tr>
          ))}
          {list.data && items.length === 0 && (
            <tr><td colSpan={8} className="empty">No decided approvals.</td></tr>
          )}
        </tbody>
      </table>
      <div className="pager">
        <button disabled={after.length === 0} onClick={() => setAfter((a) => a.slice(0, -1))}>Previous</button>
        <button disabled={!list.data?.next} onClick={() => list.data?.next && setAfter((a) => [...a, list.data!.next!])}>Next</button>
      </div>
    </div>
  );
}
