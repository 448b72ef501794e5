package sandbox

// Decision is the body of an approval decision: decision "approve" or
// "deny", or the option_id of one of the approval's options.
type Decision struct {
	Decision string `json:"decision,omitempty"`
	OptionID string `json:"option_id,omitempty"`
}
