"""Running one attempt of a step, below both transports (the embedded engine and the
remote worker): its tool or pipeline, task policies, the keychain."""
