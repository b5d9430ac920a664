"""The agent's local state: versioned JSON in the state directory, written atomically.

What a restarted agent needs to re-adopt its components, what `xce-agent status` shows,
and the decommission tombstone. A corrupt file is moved aside, never trusted or fatal.

The records (records.py) and how a saved one is read back (reading.py); the whole state and
its JSON (model.py); the file (store.py) and its writer thread (writer.py).
"""

from xce_agent.state.model import STATE_VERSION, AgentState
from xce_agent.state.records import AgentRecord, ComponentRecord, Lifecycle, StartIntent, Tombstone
from xce_agent.state.store import STATE_FILE, StateStore
from xce_agent.state.writer import StateWriter

__all__ = [
    "STATE_FILE",
    "STATE_VERSION",
    "AgentRecord",
    "AgentState",
    "ComponentRecord",
    "Lifecycle",
    "StartIntent",
    "StateStore",
    "StateWriter",
    "Tombstone",
]
