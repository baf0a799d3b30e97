package mcp

import "fmt"

// LoggingLevel is a syslog severity, as used by notifications/message.
type LoggingLevel string

// The levels, least severe first.
const (
	LevelDebug     LoggingLevel = "debug"
	LevelInfo      LoggingLevel = "info"
	LevelNotice    LoggingLevel = "notice"
	LevelWarning   LoggingLevel = "warning"
	LevelError     LoggingLevel = "error"
	LevelCritical  LoggingLevel = "critical"
	LevelAlert     LoggingLevel = "alert"
	LevelEmergency LoggingLevel = "emergency"
)

var levelRank = map[LoggingLevel]int{
	LevelDebug: 0, LevelInfo: 1, LevelNotice: 2, LevelWarning: 3,
	LevelError: 4, LevelCritical: 5, LevelAlert: 6, LevelEmergency: 7,
}

// Valid reports whether l is one of the eight defined levels.
func (l LoggingLevel) Valid() bool {
	_, ok := levelRank[l]
	return ok
}

// AtLeast reports whether l is as severe as min or more.
func (l LoggingLevel) AtLeast(min LoggingLevel) bool {
	return levelRank[l] >= levelRank[min]
}

// UnmarshalText refuses anything but the eight defined levels.
func (l *LoggingLevel) UnmarshalText(b []byte) error {
	v := LoggingLevel(b)
	if !v.Valid() {
		return fmt.Errorf("unknown logging level %q", b)
	}
	*l = v
	return nil
}
