"""The API's routes, one router per resource: agents (join, heartbeat, notice, watch, job
reports), leases, provisioning (expected hosts, to-return), hosts and jobs (admin).

Each route reads its request, calls one `Controller` method and shapes the answer with
`views`; decisions, token rules and commits belong to the controller, not to a route.
"""
