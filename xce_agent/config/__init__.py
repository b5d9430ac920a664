"""The agent's config: its schema, checks and defaults, one module per section."""
