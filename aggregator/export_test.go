package aggregator

// Storable exposes the payload check to the external test package.
var Storable = storable
