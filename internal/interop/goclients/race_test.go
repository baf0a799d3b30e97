//go:build race

package goclients_test

func init() { raceEnabled = true }
