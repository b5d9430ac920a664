"""The controller's durable store: facts appended in the same transaction as the state they make."""
