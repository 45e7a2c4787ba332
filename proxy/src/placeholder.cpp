// Placeholder translation unit until the component's issue lands.
