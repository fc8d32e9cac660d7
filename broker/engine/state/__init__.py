"""The engine's state: jobs and queues (the domain model), their owners, and the one transition
primitive; store rows and the wire form of a job."""
