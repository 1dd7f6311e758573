package pipeline

// Pending is how many of tenant's appends wait for a bundle slot (tests).
func (c *Client) Pending(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[tenant]; q != nil {
		return len(q.pending)
	}
	return 0
}
