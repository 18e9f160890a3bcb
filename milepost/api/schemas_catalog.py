"""Wire shapes of `POST /api/catalog/validate`: a playbook text checked without storing it,
answered with each problem's line, step and field (the web UI marks them on the text)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from milepost.api.checks import StrictIn
from milepost.api.schemas import ErrorOut, FieldError


class ValidateIn(StrictIn):
    content: str = Field(description="The playbook YAML to check (nothing is stored).")
    strict: bool = Field(
        default=False,
        description="Warnings are problems (DSL 12.2), as "
        "`milepost validate --strict`; the server's `strict_playbooks` "
        "makes it so whatever this says.",
    )


class ProblemOut(BaseModel):
    """A problem or warning as `milepost validate` prints it, and where it is."""

    message: str
    line: int | None = Field(description="1-based line of the text, when known.")
    step: str | None = Field(description="The step it is in; null at the root, workbook.")
    scope: str | None = Field(description="`step 'x'`, `workbook 'x'` or null.")
    field: str | None = Field(description="The field path inside the scope (`tool.code`).")


class ValidateOut(BaseModel):
    valid: bool
    steps: int = Field(description="How many steps the playbook has.")
    warnings: list[ProblemOut]


class InvalidOut(ErrorOut):
    """422: `validation_error` with `errors` (the body), or `playbook_invalid` with
    `problems` (the text), each with its line, step and field."""

    errors: list[FieldError] | None = None
    problems: list[ProblemOut] | None = None
