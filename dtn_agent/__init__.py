"""tsdn's agent for data transfer nodes: host facts, transfer engines and rate reports."""
