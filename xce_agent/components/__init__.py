"""The agent's records of its components and their adoption after an agent restart."""
