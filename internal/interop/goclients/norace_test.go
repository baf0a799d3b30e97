package goclients_test

// raceEnabled builds the server with -race under go test -race.
var raceEnabled bool
