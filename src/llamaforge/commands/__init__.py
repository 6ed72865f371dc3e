"""The command layer: Invoke tasks that parse options and call the library (one module per area)."""
