package cloud

import "github.com/fleet/fleet/shared/resource"

// ListLimit is a page's limit: def when v is not positive, at most max.
func ListLimit(v, def, max int) int {
	if v <= 0 {
		return def
	}
	return min(v, max)
}

// Paginate trims items, read with limit+1, to limit and builds the page's
// pagination: the cursor of the next page is the id of the last item.
func Paginate[T any](items []T, limit int, id func(T) string) ([]T, resource.Pagination) {
	if len(items) <= limit {
		return items, resource.Pagination{}
	}
	items = items[:limit]
	next := id(items[limit-1])
	return items, resource.Pagination{NextCursor: &next, HasMore: true}
}

// ErrCursor is the ECURSOR error of a cursor that is not an item of the
// list.
func ErrCursor() error {
	return Errorf(ECURSOR, "cursor is not an item of this list")
}
