"""Process supervision shared by the node agent and XCE's service supervision.

`spec` describes what to run, `machine` is the pure per-component lifecycle, `backoff`
computes restart delays, `process` and `loop` are the thin layer that touches the kernel.
Nothing in this package knows about controllers, roles or config files.
"""
