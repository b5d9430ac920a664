"""The controller's lifecycle in virtual time: the simulator, its scenarios and reports, and
the demo."""
