"""A discrete-event fleet simulator driving the same domain and engine with a manual clock."""
