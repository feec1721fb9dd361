"""The one session core under every WebSocket protocol (the bidirectional stream, Deepgram, Cartesia,
ElevenLabs): the session and its hooks (``session``), the upgrade's admission and refusal
(``admission``), the per-session queue of a protocol that answers requests in order
(``turn_queue``) and the socket's bounded reads and closes (``socket_io``)."""
