//go:build !linux

package wake

func newAlarm() alarm { return newTimerAlarm() }
