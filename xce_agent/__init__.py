"""xce-agent: the node agent of elastic and cloud-burst XCE hosts."""

__version__ = "0.2.0"
