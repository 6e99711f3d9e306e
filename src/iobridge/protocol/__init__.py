"""iobridge.protocol."""
