package db

// BatchBytes is batchBytes, for the test of the room a pipeline reserves.
var BatchBytes = batchBytes
