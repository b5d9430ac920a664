"""Watching the cloud provider's metadata service for interruption and maintenance notices.

`observed` holds what a parser reports, `aws`, `gce` and `azure` parse each provider's formats
(pure), `fetch` is the bounded HTTP seam, `sources` asks the metadata service and `watcher`
runs the loops and hands every new, changed or ended notice to the agent; `watching` is the
agent's side (the watcher owned, each notice a membership event) and `relay` tells the worker.
"""
