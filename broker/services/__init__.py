"""Services beside the engine, which the transports and the node use: metrics (Prometheus,
also in the reference's names), webhook delivery and its target checks, and the broadcasts
(queue counts, periodic snapshots). They read the engine; the engine never imports them.
"""
