"""iobridge.runtime."""
