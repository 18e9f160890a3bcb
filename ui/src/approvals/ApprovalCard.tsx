import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, ApiError } from "../api/client";
import type { Whoami } from "../api/types";
import { when } from "../format";
import { href, navigate } from "../router";
import { Countdown } from "./Countdown";
import type { ApprovalItem, ApprovalOut } from "./types";

const RISK_COLOURS: Record<string, string> = { low: "#27ae60", medium: "#e5a50a", high: "#d64545" };

export function RiskBadge({ risk }: { risk: string }) {
  return (
    <span className="badge" data-testid="risk" style={{ background: RISK_COLOURS[risk] ?? "#9aa5b1" }}>
      {risk} risk
    </span>
  );
}

export function RunLink({ id }: { id: string }) {
  const to = { page: "run" as const, id };
  return (
    <a href={href(to)} onClick={(e) => { e.preventDefault(); navigate(to); }}>
      run {id}
    </a>
  );
}

/** A pending approval: what the tool will do (the server's redacted rendering), who may
 * decide, the votes, the time left, and — for a role that may decide — the decision. */
export function ApprovalCard({ item, who }: { item: ApprovalItem; who: Whoami }) {
  const detail = useQuery({
    queryKey: ["approval", item.approval_id, item.approved],
    queryFn: () => api<ApprovalOut>(`/api/approvals/${item.approval_id}`),
  });
  const a = detail.data;
  return (
    <article className="approval" data-testid="approval" data-approval={item.approval_id}>
      <header>
        <strong>{item.path}</strong> · step <code>{item.step}</code> · <RunLink id={item.execution_id} />
        <RiskBadge risk={item.risk} />
        <Countdown until={item.expires_at} />
      </header>
      <dl>
        <dt>Will do</dt>
        <dd data-testid="preview">
          {a ? <Calls approval={a} /> : detail.error ? <span className="error">{(detail.error as Error).message}</span> : "…"}
        </dd>
        {a?.policy && (<><dt>Policy</dt><dd>{a.policy}</dd></>)}
        <dt>Who may decide</dt>
        <dd data-testid="approvers">{item.approvers.join(", ")} {item.started_by && <span className="muted">(started by {item.started_by}{a && !a.allow_self_approval ? ", who may not approve it" : ""})</span>}</dd>
        <dt>Votes</dt>
        <dd data-testid="votes">
          {item.approved} of {item.quorum} approvals
          {a && a.votes.length > 0 && (
            <ul>
              {a.votes.map((v) => (
                <li key={v.identity}>{v.identity} {v.decision === "approve" ? "approved" : "denied"}{v.reason ? `: ${v.reason}` : ""} <span className="muted">{when(v.at)}</span></li>
              ))}
            </ul>
          )}
        </dd>
      </dl>
      {who.may.approve && <Decide id={item.approval_id} />}
    </article>
  );
}

function Calls({ approval }: { approval: ApprovalOut }) {
  return (
    <div>
      {approval.kind && <span>a <code>{approval.kind}</code> call</span>}
      {approval.calls.map((c) => (
        <pre key={c.index} className="call">{JSON.stringify(c.input, null, 2)}</pre>
      ))}
    </div>
  );
}

function Decide({ id }: { id: string }) {
  const client = useQueryClient();
  const [reason, setReason] = useState("");
  const decide = useMutation({
    mutationFn: (decision: "approve" | "deny") =>
      api<ApprovalOut>(`/api/approvals/${id}/decision`, {
        method: "POST",
        body: JSON.stringify({ decision, reason: reason.trim() || null }),
      }),
    onSettled: () => client.invalidateQueries({ queryKey: ["approvals"] }),
  });
  const err = decide.error;
  return (
    <form className="decide" onSubmit={(e) => e.preventDefault()}>
      <input name="reason" placeholder="reason" value={reason} maxLength={2000} onChange={(e) => setReason(e.target.value)} />
      <button type="button" disabled={decide.isPending} onClick={() => decide.mutate("approve")}>Approve</button>
      <button type="button" className="danger" disabled={decide.isPending} onClick={() => decide.mutate("deny")}>Deny</button>
      {err && (
        <span className="error" role="alert" data-testid="refusal">
          {err instanceof ApiError ? `${err.message} (${err.code})` : String(err)}
        </span>
      )}
    </form>
  );
}
