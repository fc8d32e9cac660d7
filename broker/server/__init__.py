"""Network front ends: TCP now; HTTP and WebSocket later. They only talk to the engine actor."""
