"""`milepost verify`: a fault suite anyone can run against their installation.

A server and worker processes (`supervisor`) run the mixed playbooks of `playbooks/`
(`catalog`) many times while a schedule drawn from the seed (`schedule`) kills and pauses
them (`suite`); then the invariants (`checks`, pure functions of the event log, the side
effects table (`effects`) and what the workers were told was stored (`journal`)) are
checked and printed (`report`).
"""
