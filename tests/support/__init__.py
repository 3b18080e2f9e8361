"""What tests share: a broker harness for channel suites (``harness``), one wait-for-an-event helper
(``events``), one way to serve an ASGI stand-in on loopback (``serve``), and the providers' stand-ins."""
