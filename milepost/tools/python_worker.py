"""The child side of the python tool: a warm worker process running user code (DSL 3.1).

Kept light on purpose (stdlib only): it is imported once per worker process. The parent
sends `pickle((source, inputs, context, idempotency_key, libs[, log_cap]))` and gets back
`("ok", value, output, usage)` or `("error", class_name, text, output, traceback, at,
usage)`: `output` what the code printed, `[(stream, text, cut)]` per stream written
(`core.logs`: each kept within `log_cap` bytes, head and tail), `traceback` the
exception's frames from the code's first on (its lines quoted), `at` `(line, text)` of
the last frame in the code (None outside it), `usage` the global the code assigned (DSL
10.6: tokens and cost, spent even when the code then raised; None when unassigned).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import io
import json
import keyword
import linecache
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from milepost.core import logs

PROTOCOL = 5
READY = b"ready"
CACHE_LIMIT = 512
SPECIALS = ("input_data", "args", "context", "idempotency_key")
USAGE = "usage"
"""The global the code assigns to report its usage (a reserved name: it starts unset,
whatever the inputs hold)."""
_BODY = "__milepost_body__"
_FALLTHROUGH = "__milepost_fallthrough__"
FILENAME = "<python tool>"
"""The file name of the code's frames (the parent names it as the step in the traceback)."""


BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv.pop(2)); "
    "from milepost.tools import python_worker; python_worker.serve(sys.argv)"
)
"""What a worker process runs (`python -c BOOT FD SYS_PATH`): the parent's `sys.path`, so
the code imports what the parent would (`libs`, the classes of pickled inputs), then
`serve`. Nothing else is imported: not the parent's `__main__` (a `multiprocessing` spawn
re-imports it, the whole CLI for `milepost worker`: four times the memory and ten times
the start-up of this module)."""


def serve(argv: list[str]) -> None:
    """The entry of a worker process: serve calls on the pipe whose fd is `argv[1]`."""
    fd = int(argv.pop(1))
    main(Connection(fd))


def main(conn: Connection) -> None:
    """Serve calls on `conn` until the parent closes it."""
    _isolate_stdio()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    runner = Runner()
    conn.send_bytes(READY)
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        reply = runner.handle(payload)
        try:
            conn.send_bytes(reply)
        except OSError:
            return


def _isolate_stdio() -> None:
    """Point fd 1 at fd 2 so nothing the code writes reaches the parent's stdout."""
    try:
        sys.stdout.flush()
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        except OSError:
            pass


class Capture(io.TextIOBase):
    """A size-capped text sink standing in for sys.stdout or sys.stderr during one call."""

    def __init__(self, limit: int = logs.DEFAULT_CAP) -> None:
        super().__init__()
        self.sink = logs.Capped(limit)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.sink.write(text)
        return len(text)


def _output(streams: Mapping[str, Capture]) -> list[tuple[str, str, int]] | None:
    found = [
        (name, c.text, c.cut)
        for name, capture in streams.items()
        if (c := capture.sink.value()) is not None
    ]
    return found or None


class Runner:
    """Compiles (with a cache) and runs user code; one per worker process."""

    def __init__(self) -> None:
        self._code: dict[str, Any] = {}
        self._bodies: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._libs: dict[Any, dict[str, Any]] = {}
        self.usage: Any = None
        """The `usage` global the last call's code left (None: not assigned)."""

    def handle(self, payload: bytes) -> bytes:
        saved = sys.stdout, sys.stderr
        self.usage = None
        streams: dict[str, Capture] = {}
        try:
            source, inputs, context, key, libs, *rest = pickle.loads(payload)
            limit = int(rest[0]) if rest else logs.DEFAULT_CAP
            streams = {logs.STDOUT: Capture(limit), logs.STDERR: Capture(limit)}
            sys.stdout, sys.stderr = streams[logs.STDOUT], streams[logs.STDERR]
            # the traceback quotes the code's lines: linecache holds them for its file name
            linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
            value = to_jsonable(self.run(source, inputs, context, key, libs))
            reply: tuple[Any, ...] = ("ok", value, _output(streams))
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            trace, at = _traceback(exc)
            reply = ("error", type(exc).__name__, _text(exc), _output(streams), trace, at)
        finally:
            sys.stdout, sys.stderr = saved
        usage = None
        if self.usage is not None:
            try:
                usage = to_jsonable(self.usage)
            except BaseException:  # noqa: BLE001 - the parent reports it as not a mapping
                usage = repr(self.usage)
        try:
            return pickle.dumps((*reply, usage), protocol=PROTOCOL)
        except BaseException as exc:  # noqa: BLE001
            return pickle.dumps(
                ("error", type(exc).__name__, _text(exc), None, None, None, None), PROTOCOL
            )

    def run(
        self,
        source: str,
        inputs: dict[str, Any],
        context: dict[str, Any],
        key: str,
        libs: Any,
    ) -> Any:
        ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "__milepost_tool__"}
        ns["input_data"] = inputs
        ns["args"] = dict(inputs)
        ns["context"] = context
        ns["idempotency_key"] = key
        if libs:
            ns.update(self._modules(libs))
        ns.update(inputs)
        ns[USAGE] = None
        code = self._compile(source)
        try:
            if code is not None:
                exec(code, ns)
                return _outcome(ns, inputs)
            params = tuple(name for name in ns if _is_param(name))
            ns[_FALLTHROUGH] = partial(_fallthrough, inputs=inputs, ns=ns)
            exec(self._body(source, params), ns)
            return ns.pop(_BODY)(*(ns[p] for p in params))
        finally:
            self.usage = ns.get(USAGE)

    def _compile(self, source: str) -> Any:
        """The module code object, or None when the source has a top-level `return`."""
        try:
            return self._code[source]
        except KeyError:
            pass
        try:
            code = compile(source, FILENAME, "exec")
        except SyntaxError:
            if not _has_top_level_return(source):
                raise
            code = None
        _remember(self._code, source, code)
        return code

    def _body(self, source: str, params: tuple[str, ...]) -> Any:
        key = (source, params)
        code = self._bodies.get(key)
        if code is None:
            code = compile(_as_function(source, params), FILENAME, "exec")
            _remember(self._bodies, key, code)
        return code

    def _modules(self, libs: Any) -> dict[str, Any]:
        key = json.dumps(libs, sort_keys=True, default=str)
        found = self._libs.get(key)
        if found is None:
            found = {}
            pairs = libs.items() if isinstance(libs, Mapping) else ((None, m) for m in libs)
            for alias, name in pairs:
                if isinstance(name, Mapping):  # {from: m, import: n}: `from m import n`
                    found[str(alias)] = _from_import(str(name["from"]), str(name["import"]))
                    continue
                module = importlib.import_module(str(name))
                if alias is None:  # a bare list works like `import a.b`: binds `a`
                    alias = str(name).partition(".")[0]
                    module = sys.modules[alias]
                found[str(alias)] = module
            self._libs[key] = found
        return found


def _from_import(module: str, name: str) -> Any:
    """`from module import name`: an attribute of the module, else its submodule."""
    imported = importlib.import_module(module)
    try:
        return getattr(imported, name)
    except AttributeError:
        return importlib.import_module(f"{module}.{name}")


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= CACHE_LIMIT:
        del cache[next(iter(cache))]
    cache[key] = value


def _is_param(name: str) -> bool:
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("__")
        and name != USAGE
    )


def _has_top_level_return(source: str) -> bool:
    try:
        tree = ast.parse(source, FILENAME)
    except SyntaxError:
        return False
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _as_function(source: str, params: tuple[str, ...]) -> ast.Module:
    """`def __milepost_body__(<params>): <source>; return fallthrough(locals())`."""
    tree = ast.parse(source, FILENAME)
    module = ast.parse(f"def {_BODY}({', '.join(params)}):\n    return {_FALLTHROUGH}(locals())")
    func = module.body[0]
    assert isinstance(func, ast.FunctionDef)
    # `usage = ...` in code with a top-level `return` must still reach the global
    func.body = [ast.Global(names=[USAGE]), *tree.body, *func.body]
    ast.fix_missing_locations(module)
    return module


def _outcome(ns: Mapping[str, Any], inputs: Mapping[str, Any]) -> Any:
    """`result` if set, else what `main` returns, else None."""
    result = ns.get("result")
    if result is not None:
        return result
    entry = ns.get("main")
    if callable(entry):
        return call_main(entry, inputs, ns)
    return None


def _fallthrough(scope: dict[str, Any], *, inputs: Mapping[str, Any], ns: Mapping[str, Any]) -> Any:
    """The result of function-body code that ended without `return`."""
    merged = {**ns, **scope}
    return _outcome(merged, inputs)


def call_main(entry: Callable[..., Any], inputs: Mapping[str, Any], ns: Mapping[str, Any]) -> Any:
    """Call `main` with the inputs matching its parameter names (all of them for **kwargs)."""
    try:
        parameters = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return entry()
    positional: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in parameters:
        if p.kind is p.VAR_KEYWORD:
            kwargs.update((k, v) for k, v in inputs.items() if k not in kwargs)
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif p.name in inputs or p.name in SPECIALS:
            value = inputs[p.name] if p.name in inputs else ns.get(p.name)
            if p.kind is p.POSITIONAL_ONLY:
                positional.append(value)
            else:
                kwargs[p.name] = value
    return entry(*positional, **kwargs)


def to_jsonable(value: Any) -> Any:
    """A result as plain JSON-able data of exact builtin types (DSL 3.1).

    Tuples and other lists become lists, mapping keys strings, and anything else that JSON
    cannot hold passes through `str`. A reference cycle is an error.
    """
    try:
        return _jsonable(value)
    except RecursionError:
        raise ValueError("result is nested too deeply or contains a reference cycle") from None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {k if type(k) is str else _key(k): _jsonable(v) for k, v in value.items()}
    if kind is list or isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return _str(value)


def _key(key: Any) -> str:
    return key if type(key) is str else _str(key)


def _str(value: Any) -> str:
    try:
        return str.__str__(value) if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the result
        return f"<unprintable {type(value).__name__}>"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<unprintable {type(exc).__name__}>"


def _traceback(exc: BaseException) -> tuple[str | None, tuple[int, str] | None]:
    """The exception's traceback from the code's first frame on (this module's frames, which
    ran it, left out), and `(line, text)` of its last frame in the code."""
    try:
        found = traceback.TracebackException.from_exception(exc)
        while found.stack and found.stack[0].filename == __file__:
            found.stack.pop(0)
        ours = [f for f in found.stack if f.filename == FILENAME]
        if ours:
            at: tuple[int, str] | None = (ours[-1].lineno or 0, (ours[-1].line or "").strip())
        elif isinstance(exc, SyntaxError) and exc.filename == FILENAME and exc.lineno:
            at = (exc.lineno, (exc.text or "").strip())
        else:
            at = None
        return "".join(found.format()), at
    except Exception:  # noqa: BLE001
        return None, None
