package apikey

// HashSlots exposes the relay-wide bcrypt slots, so that a test can hold
// them all.
func (a *Authenticator) HashSlots() chan struct{} { return a.hashSlots }
