"""The HTTP edge: the request table, the app factory, the one access guard, the one error
renderer, admin routes, the console and the front doors."""
