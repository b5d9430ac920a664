"""Everything that talks to the controller: the link, its HTTP client and bounds, the
credential, the join guard and deadline, leases, notices, reports and what the worker is handed.
"""
