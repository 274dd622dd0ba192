package razorpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/countersign/countersign/internal/rail"
)

// row is what Find keeps of a listed entity that does not carry the stamp.
type row struct {
	id      string
	created int64
}

// errValueTooLarge: one value of a list answer exceeds maxBody.
var errValueTooLarge = fmt.Errorf("a value of the answer exceeds %d bytes", maxBody)

// valueBudget is a reader that lets at most n more bytes through until it
// is given a new budget: the decoder of a list answer holds one value at a
// time, so bounding each value bounds what a page costs in memory, while a
// page of large entities (the agent writes their notes) stays readable.
type valueBudget struct {
	r io.Reader
	n int64
}

func (v *valueBudget) Read(p []byte) (int, error) {
	if v.n <= 0 {
		return 0, errValueTooLarge
	}
	if int64(len(p)) > v.n {
		p = p[:v.n]
	}
	n, err := v.r.Read(p)
	v.n -= int64(n)
	return n, err
}

// listPage GETs one page of a list and streams it: each item is checked
// as a want entity, and only its id and second are kept, or the whole
// entity when it carries stamp. A page whose answer as a whole exceeds
// maxBody is read all the same; one item above maxBody is an error.
func listPage(ctx context.Context, c rail.Client, path, want, stamp string) ([]row, *rail.Entity, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return nil, nil, fmt.Errorf("status %d: %s", resp.StatusCode, errorMessage(body))
	}
	budget := &valueBudget{r: resp.Body, n: maxBody}
	dec := json.NewDecoder(budget)
	undecodable := func(err error) error {
		if errors.Is(err, errValueTooLarge) {
			return err
		}
		return fmt.Errorf("undecodable: %w", err)
	}
	if tok, err := dec.Token(); err != nil {
		return nil, nil, undecodable(err)
	} else if tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a collection (starts with %v)", tok)
	}
	var (
		rows       []row
		match      *rail.Entity
		entityName string
		haveItems  bool
		keys       = map[string]bool{}
	)
	for dec.More() {
		budget.n = maxBody
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, undecodable(err)
		}
		key, _ := tok.(string)
		if keys[key] {
			return nil, nil, fmt.Errorf("member %q twice", key)
		}
		keys[key] = true
		switch key {
		case "entity":
			if err := dec.Decode(&entityName); err != nil {
				return nil, nil, undecodable(err)
			}
		case "items":
			haveItems = true
			if tok, err := dec.Token(); err != nil {
				return nil, nil, undecodable(err)
			} else if tok != json.Delim('[') {
				return nil, nil, fmt.Errorf("items is not an array (starts with %v)", tok)
			}
			for i := 0; dec.More(); i++ {
				if i == pageCount {
					return nil, nil, fmt.Errorf("more than the %d items asked for", pageCount)
				}
				budget.n = maxBody
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return nil, nil, fmt.Errorf("item %d: %w", i, undecodable(err))
				}
				e, err := entity(raw, want)
				if err != nil {
					return nil, nil, fmt.Errorf("item %d: %w", i, err)
				}
				if e.Stamp == stamp && match == nil {
					match = &e
				}
				rows = append(rows, row{id: e.ID, created: e.Created.Unix()})
			}
			if _, err := dec.Token(); err != nil { // ]
				return nil, nil, undecodable(err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, nil, undecodable(err)
			}
		}
	}
	budget.n = maxBody
	if _, err := dec.Token(); err != nil { // }
		return nil, nil, undecodable(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("data after the collection")
	}
	if entityName != "collection" || !haveItems {
		return nil, nil, fmt.Errorf("not a collection (entity %q, items missing)", entityName)
	}
	return rows, match, nil
}
