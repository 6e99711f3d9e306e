"""iobridge.http."""
