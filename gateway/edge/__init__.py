"""The HTTP edge: the app factory, the access guard, admin routes and the front doors."""
