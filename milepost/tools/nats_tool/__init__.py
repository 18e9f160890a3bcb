"""The nats tool (DSL 12.1): one JetStream key/value, object store or stream operation
per call, never a blocking subscription.

```yaml
tool: {kind: nats, auth: "{{ nats_credential }}", operation: kv_put, bucket: sessions,
       key: "{{ k }}", value: "{{ v }}"}
```

- Connection: `auth` names a registered credential of type `nats` (data `url`, optional
  `user` + `password` or `token`), else the process's NATS URL (`MILEPOST_NATS_URL`, the
  setting the server and workers use for wake-ups); with neither the call is `invalid`.
  One connection per call, closed when it ends (cancelled or timed out included).
- Operations and their fields: `milepost.playbook.nats_ops` (checked at load; a templated
  `operation` is checked when it renders). Results: `operations`.
- Values: mappings and lists are stored as JSON and read back parsed; strings are stored
  as UTF-8; other scalars as their JSON text. A read parses text that is a JSON object or
  array; anything else comes back as the string (bytes that are not UTF-8 as base64).
- Missing: a key, an object, a message or a stream that does not exist, and any read of a
  bucket that does not exist, is `{found: false, ...}`, not an error. `kv_put` and
  `object_put` create their bucket when it does not exist (default configuration).
- Errors: `connection` (retryable) when the server cannot be reached or the connection is
  lost; `auth` when the server refuses the credentials; `timeout` (retryable) past
  `ToolCall.timeout` or a JetStream request's own; `not_found` when no stream captures a
  published subject; `invalid` for a bad operation, field, name or credential;
  `server_error` for any other JetStream refusal (`code` its error code). Passwords and
  tokens are masked in every message.
"""
