"""The controller's pure core: model, facts, lifecycle decisions, jobs, deadlines, notices,
leases, crash loops and codecs.

No I/O here (no database, sockets, processes or HTTP): the service shell hands every decision
the time and the state it decides on. The import contracts keep it so.
"""
