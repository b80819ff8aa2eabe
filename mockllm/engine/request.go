package engine

import "fmt"

// checkRequest rejects requests no scheduler can serve; minPrompt is the
// smallest prompt the mode accepts.
func checkRequest(p Profile, req Request, minPrompt int) error {
	switch {
	case req.PromptTokens < minPrompt:
		return fmt.Errorf(
			"engine: request %q: prompt tokens must be >= %d, got %d",
			req.ID,
			minPrompt,
			req.PromptTokens,
		)
	case req.OutputTokens < 0:
		return fmt.Errorf("engine: request %q: output tokens must be >= 0, got %d", req.ID, req.OutputTokens)
	case p.MaxModelLen > 0 && req.PromptTokens+req.OutputTokens > p.MaxModelLen:
		return fmt.Errorf("%w: request %q: %d prompt + %d output tokens > %d",
			ErrTooLong, req.ID, req.PromptTokens, req.OutputTokens, p.MaxModelLen)
	}
	return nil
}
