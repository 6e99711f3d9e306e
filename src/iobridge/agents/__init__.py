"""iobridge.agents."""
