"""The error tree. Errors carry fields and a stable `code`; the docstring is the default message."""

from __future__ import annotations

from typing import Any


class MilepostError(Exception):
    """milepost failed."""

    code = "milepost_error"

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.fields = fields
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.fields}


class PlaybookInvalid(MilepostError):
    """The playbook is invalid."""

    code = "playbook_invalid"

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{where}{len(problems)} problem(s):\n{lines}", problems=problems, source=source
        )


TEMPLATE_KEPT = 500
"""Characters of a failed template kept in the step's error (`TemplateError.failure`)."""


class TemplateError(MilepostError):
    """A template could not be rendered."""

    code = "template_error"

    def failure(self) -> dict[str, Any]:
        """The error of the step it fails: kind `template`, the message and, when the
        renderer said them, where (`step 'a': input 'v'`) and the template itself."""
        found = {k: self.fields[k] for k in ("where", "template") if self.fields.get(k)}
        if isinstance(found.get("template"), str) and len(found["template"]) > TEMPLATE_KEPT:
            found["template"] = found["template"][:TEMPLATE_KEPT] + "..."
        return {"kind": "template", "message": self.message, **found}


class UndefinedValue(TemplateError):
    """A template referenced an undefined name."""

    code = "undefined"


class ExecutionNotFound(MilepostError):
    """No execution with that id."""

    code = "execution_not_found"


class PlaybookNotFound(MilepostError):
    """No playbook registered under that path and version."""

    code = "playbook_not_found"


class ConcurrencyConflict(MilepostError):
    """Another writer changed the same record first."""

    code = "concurrency_conflict"


class ClaimRefused(MilepostError):
    """The command cannot be claimed."""

    code = "claim_refused"
