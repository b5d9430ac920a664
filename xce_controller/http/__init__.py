"""The controller's HTTP face: routes, auth, errors, schemas, limits, the server, the event
stream, metrics and the status page. Routes translate HTTP to `Controller` calls and back.
"""
