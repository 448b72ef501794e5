package coordinator

// box is the runtime of one sandbox.
type box struct {
	c  *Coordinator
	id string
}

func (c *Coordinator) box(id string) (*box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.boxes[id]
	if !ok {
		b = &box{c: c, id: id}
		c.boxes[id] = b
	}
	return b, nil
}

func (b *box) boot() {}
