package host

// SetStepHook has f told of each shutdown step before it runs, on the
// goroutine that runs it: the tests record the order, and check what
// holds between two steps.
func SetStepHook(rt *Runtime, f func(step string)) { rt.stepHook = f }
