"""The server-side text stream: text in pieces of any size, cut by the sentence rules, flushed and cleared on a protocol's word; the set of streams one socket holds."""
