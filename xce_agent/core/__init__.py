"""The agent's pure decisions: membership, lease holding, answers, pending notices, holds.

No I/O here (no sockets, files, processes or clocks read): every function takes the time and
the facts it decides on, so each is tested without a host. The import contracts keep it so.
"""
