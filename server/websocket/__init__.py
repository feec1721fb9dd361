"""What every WebSocket route shares: the bounded reader, sends, closes, admission, idle timeout and draining of a socket."""
