package ledger

import (
	"errors"
	"sync"
	"testing"
)

// Update returns its function's error and keeps what it committed; Read
// sees that generation and refuses a Commit, changing nothing.
func TestUpdateAndRead(t *testing.T) {
	f := newFixture(t)
	want := errors.New("the event failed after its commit")
	err := f.l.Update(func(tx *Tx) error {
		next, rec := admit(t, tx, "p", "c", 2)
		if _, err := tx.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}}); err != nil {
			t.Fatal(err)
		}
		return want
	})
	if err != want {
		t.Fatalf("Update returned %v, want its function's error", err)
	}
	f.l.Read(func(tx *Tx) {
		if tx.Gen() != 1 || tx.Len() != 1 {
			t.Errorf("Read: gen %d, %d records; want 1, 1", tx.Gen(), tx.Len())
		}
		next, rec := admit(t, tx, "p", "d", 2)
		if _, err := tx.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}}); !errors.Is(err, ErrReadOnly) {
			t.Errorf("Commit inside Read: %v, want ErrReadOnly", err)
		}
	})
	n, err := Within(f.l, func(tx *Tx) (int, error) { return tx.Len(), nil })
	if n != 1 || err != nil || f.store.saves != 1 {
		t.Errorf("after the refused Commit: %d records (%v), %d saves; want 1 record, 1 save", n, err, f.store.saves)
	}
	// Update after Read may commit again: Read's refusal does not stick.
	if err := f.l.Update(func(tx *Tx) error {
		_, err := tx.Commit(Change{Life: Life{AwaitStart: "x"}})
		return err
	}); err != nil {
		t.Errorf("Commit inside Update after a Read: %v", err)
	}
}

// Updates and Reads from many goroutines see whole generations: every
// Update commits a record and bumps the generation by one, so a Read's
// generation always equals its record count (go test -race checks that
// nothing reaches the state outside the lock).
func TestUpdatesSerialize(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = f.l.Update(func(tx *Tx) error {
				rec := Record{ID: string(rune('a' + i)), Pod: "p", Name: string(rune('a' + i))}
				_, err := tx.Commit(Change{Index: IndexChange{Edit: Edit{Put: []Record{rec}}}})
				return err
			})
		}()
		go func() {
			defer wg.Done()
			f.l.Read(func(tx *Tx) {
				if uint64(tx.Len()) != tx.Gen() {
					t.Errorf("Read saw %d records at generation %d", tx.Len(), tx.Gen())
				}
			})
			_ = f.l.View()
		}()
	}
	wg.Wait()
	if v := f.l.View(); len(v.Ctrs) != 4 {
		t.Errorf("%d records after 4 Updates", len(v.Ctrs))
	}
}
